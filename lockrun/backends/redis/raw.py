"""Commands sent as they are, replies read as the server gave them (``lockrun doctor``).

redis-py parses some replies with callbacks that assume a well-formed answer (COMMAND INFO with
an unknown command crashes its parser); the doctor asks servers that may have renamed, denied or
never had a command, so it reads raw replies. Every command of one batch goes out in one write
and the replies come back in order: one round trip. An error reply is returned in its place (a
``ResponseError``), so that one denied command spoils nothing else; a connection that fails
raises as every lockrun call does (client.REDIS_ERRORS), bounded by the client's timeouts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import ResponseError

from lockrun.backends.redis.client import pooled_connection

Command = tuple[Any, ...]


class RawCalls:
    """Raw commands on one connection of ``client``'s pool (a plain or Sentinel master client)."""

    def __init__(self, client: redis.Redis) -> None:
        self._pool = client.connection_pool

    def batch(self, commands: Sequence[Command]) -> list[object]:
        """Each command's reply, or the ResponseError the server answered it with."""
        if not commands:
            return []
        connection = pooled_connection(self._pool)
        replies: list[object] = []
        try:
            connection.send_packed_command(connection.pack_commands([list(command) for command in commands]))
            for _ in commands:
                try:
                    replies.append(connection.read_response())
                except ResponseError as exc:
                    replies.append(exc)
        except BaseException:
            connection.disconnect()  # replies may still be on their way: nobody else may read them
            raise
        finally:
            self._pool.release(connection)
        return replies

    def one(self, *command: Any) -> object:
        """One command's reply; an error reply is raised (ResponseError)."""
        (reply,) = self.batch([command])
        if isinstance(reply, ResponseError):
            raise reply
        return reply
