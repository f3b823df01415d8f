"""The lean fork server every worker is forked from: its loop, wire format, preload, warm-up."""
