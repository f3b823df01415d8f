"""Configuration: the options table, their parsers, and the frozen settings built from them."""
