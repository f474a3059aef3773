"""Starting and stopping the processes of one machine: Redis, tritonserver, the server wrapper."""
