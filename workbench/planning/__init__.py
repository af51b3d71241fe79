"""Capacity planning on the simulator: searches over configurations for the highest rate
or the cheapest deployment meeting SLOs, and what-if comparisons (`workbench plan`)."""
