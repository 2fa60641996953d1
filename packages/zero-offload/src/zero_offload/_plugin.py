"""Hook implementations of zero-offload, loaded through the `zero` entry point; imports no torch at module level."""
