"""tokenstep: watch a real llama.cpp model write, one token at a time."""

__version__ = "0.1.0"
