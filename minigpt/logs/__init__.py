"""The run's logs: the metrics log (`metrics`), a long one in bounded memory (`curve_sample`) and
following it as it grows (`follow`), TensorBoard event files, samples by step, trimming a log back
on resume (`trim`), and the training curve's verdict (`curve`, `curve_rules`,
`curve_levels`, `curve_instability`)."""
