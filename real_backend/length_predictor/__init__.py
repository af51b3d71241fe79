"""A learned response-length predictor for the real backend ("perception in advance").

Zheng et al. (2023) fine-tune the served LLM to say how long its answer will be. Here the
served model stays frozen: a small head reads its final hidden state of the prompt and
predicts the length of the answer that model gives. `workbench predictor train` makes the
training data by letting the model answer (`lengths.py`), trains and picks the head
(`train.py`), and saves it with a card of its held-out errors (`artifact.py`); the
scenario predictor `{kind: learned}` loads it (`predictor.py`).

One concept per module: `dataset` (which prompts), `lengths` (what the model answers),
`features` (its hidden state of a prompt), `heads` (the head and its fit), `metrics`
(errors), `artifact` (save / load), `train`, `predictor`, `cli`.
"""
