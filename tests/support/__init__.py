"""Helpers and server fixtures shared by the tests."""
