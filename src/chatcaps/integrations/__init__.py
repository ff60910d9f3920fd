"""Thin adapters between chatcaps and the libraries and servers that run chat models."""
