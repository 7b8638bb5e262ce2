"""What server and worker keep in JetStream besides the event log: the playbook catalog, the
encrypted credential store and the audit trail of credential use. Apart from ``noetl.events``
because these parse playbooks and hold secrets; the wire and transport code needs neither."""
