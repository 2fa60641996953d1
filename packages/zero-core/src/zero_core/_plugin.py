"""Hook implementations of zero-core, loaded through the `zero` entry point; imports no torch at module level."""
