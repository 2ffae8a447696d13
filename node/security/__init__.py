"""Who is on a connection: listeners' security protocols, TLS, SASL authentication, ACLs, quotas."""
