"""llama.cpp's sampler chain: settings, stages, grammars."""
