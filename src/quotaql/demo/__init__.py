"""The demo: an example shop API protected by quotaql, and scripted traffic against it."""
