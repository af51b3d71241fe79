"""Pipeline-parallel decoding over stage processes: plain pipelining, synchronous speculative
decoding over the stages, and PipeInfer's asynchronous speculation with early cancellation.

Rank 0 (the head) embeds tokens, runs the first layer range, drafts and picks tokens; ranks
1..P-1 each run a contiguous layer range over their own paged KV cache; the last stage
applies the final norm and LM head and sends each run's greedy choices back to the head.
Stages talk over `torch.distributed` point-to-point messages (`transport.py`); the workbench
starts them on one machine (`launch.py`), `torchrun` across machines (`torchrun_main.py`).
"""
