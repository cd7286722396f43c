"""Output formats: each a function from a Report to text or a rich renderable."""
