"""The one client of a NoETL deployment: submit, wait, cancel and read an execution over NATS.

The CLI, the HTTP API and the ``playbook`` tool all go through it, so there is one way to ask
for an execution and one way to follow it to its end.
"""
