"""Watching the user's own training loop: `minigpt.watch(model, optimizer, workspace=RUN)`.

`watch` records the loop through public PyTorch hooks (`watch.py`, with the readings in
`probes.py`), writes the run folder in the trainer's formats (`runlog.py`), and the loop checks
read it back (`loop_log.py`, torch-free). `callbacks.py` holds the Hugging Face and Lightning
callbacks that start the same watch.
"""
