"""Text to batches: the corpus (`corpus`), preparing a workspace (`prepare`), the tokenizer, the
token batches training draws (`batches`) and how the splits relate (`splits`)."""
