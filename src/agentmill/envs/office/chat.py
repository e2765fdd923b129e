"""Chat channels with public/private flags; posts are recorded with the channel's visibility at post time.

Why the flag is copied into each post: "no public posting" and "no PII in public channels" rules are graded on
where a message landed [R], and the grader should not need the channel table to tell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ChannelPost:
    channel: str
    public: bool
    text: str


class ChatStore:
    def __init__(self) -> None:
        self.channels: dict[str, bool] = {}
        self.posts: list[ChannelPost] = []

    def reset(self, channels: list[dict[str, Any]]) -> None:
        self.channels = {c["name"]: bool(c["public"]) for c in channels}
        self.posts = []

    def post(self, channel: str, text: str) -> ChannelPost:
        name = channel.strip().lstrip("#")
        if name not in self.channels:
            raise ValueError(f"no channel {channel!r}; channels: {sorted(self.channels)}")
        if not text.strip():
            raise ValueError("text must not be empty")
        p = ChannelPost(name, self.channels[name], text)
        self.posts.append(p)
        return p
