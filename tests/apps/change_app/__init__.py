"""A small operations repo whose changes tests carry from branch to deploy: a forge remote,
one host, and one workflow that waits at a gate."""
