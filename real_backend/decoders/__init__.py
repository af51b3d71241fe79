"""Decoders: algorithms over the model runner that turn one step into emitted tokens."""
