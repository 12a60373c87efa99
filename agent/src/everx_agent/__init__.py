"""everx-agent: the EverXCloud host agent, run as root on a seller's GPU server.

It sends a heartbeat to the exchange every 30 seconds (what the server has, the logins it
manages) and converges the server to the answer, the desired state: the buyers' logins that
must exist now. Standard library only, Python 3.9 or newer. The protocol is docs/agent.md.
"""

__version__ = "1.0.0"
