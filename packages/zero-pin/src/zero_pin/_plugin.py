"""Hook implementations of zero-pin, loaded through the `zero` entry point; imports no torch at module level."""
