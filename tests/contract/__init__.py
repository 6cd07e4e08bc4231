"""Contract tests: what the clients send and the simulators answer, against the providers' specs."""
