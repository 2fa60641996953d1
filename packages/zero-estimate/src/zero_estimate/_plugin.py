"""Hook implementations of zero-estimate, loaded through the `zero` entry point; imports no torch at module level."""
