"""The observers: the eval callback and what it reads, looking without changing."""
