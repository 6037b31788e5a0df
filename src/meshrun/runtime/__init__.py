"""The effects: the job's store, the join, preflight, the watchdog, torch's elastic agent, the
logs, simulated nodes, the doctor's checks. Only this layer (and the CLI) touches processes,
sockets and files on the launcher's side."""
