"""PipeInfer and plain pipeline-parallel decoding at batch 1: runs through stages, simulated."""
