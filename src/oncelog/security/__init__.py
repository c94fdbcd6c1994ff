"""Authentication and authorization without IO: SASL mechanisms, SCRAM credentials, ACLs."""
