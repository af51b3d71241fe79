"""Decoder step models: what a multi-token decoder's step emits and costs, per sequence.

A step model (`step_model.py`) draws, for every decoding sequence of a step, how many
tokens beyond the first it emits (`acceptance.py`: a distribution over 0..K, from an
acceptance rate, per-position rates, a histogram, or a real run via `calibration.py`) and
says how many tokens the target computes for it. `draft_cost.py` prices the draft model's
forwards; `stepper.py` turns one scheduled step into its draws, records and duration;
`factory.py` builds all of it from a scenario. Vanilla decoding uses none of this.
"""
