"""What this machine can run: CPU runtime set-up (tcmalloc, thread binding), GPU start decisions and the
capability probe."""
