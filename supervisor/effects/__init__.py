"""Where the pool's actions are carried out against Nomad: the factory's writes, inactivity expiry, the
prewarming-pool alerter, and the stops of commands left in runners."""
