"""Running commands on the fleet's hosts: over SSH (`supervisor.execute.ssh`, asyncssh, imported
only where SSH is used), or locally for `local: true` hosts (`supervisor.execute.local`); a dry
run records what would run (`supervisor.execute.dryrun`); `supervisor.execute.fleet` picks one
per host."""
