"""Bundles: reading a folder or archive safely, its layout, and loading its files through the parsers."""
