"""A worker process: one node controller driven over a pipe; and the fork server it comes from."""
