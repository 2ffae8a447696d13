"""asyncio helpers both server processes run on: orderly task shutdown, time slices that keep the
event loop answering, a stall probe, and the process table of a cluster."""
