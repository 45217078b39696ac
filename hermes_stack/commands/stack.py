"""Placeholder: the owning issue fills this module."""
