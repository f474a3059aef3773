"""Threads of our own for synchronous callers.

    loop_thread.py   an asyncio loop on a thread of its own: start, stop, call into it

The server's load publisher and self-registration, the supervisor and the autoscaler each run
an async service beside synchronous code (`switchyard triton`, `switchyard up`). They share
this one way to start it, stop it and hear how it ended. At the bottom of the layers beside
`config`: it imports nothing of ours, so every part may use it.
"""
