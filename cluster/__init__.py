"""kraftwerk.

`cluster.formats` and `cluster.runtime` are the ground floor that node and controller processes
load; `cluster.launch`, `cluster.tools`, `cluster.cli` and `cluster.bench` are the user floor
(`from cluster.launch import Cluster`), which no process below imports.
"""
