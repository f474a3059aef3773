"""Request routing across a pool's servers: prefix-block hashes, the prefix index, the routing policy."""
