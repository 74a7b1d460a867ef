"""The operator agent: a person asks in plain words, and the agent answers from the live
instance and proposes acts that the person confirms (README, "Operator agent").

An app opts in with `App(agent=OperatorAgent(model=...))`, which adds the built-in workflow
`chat` (each turn of a chat is one of its runs). `Chats(client)` is the room people use: open a
chat, ask, confirm or discard the draft, try a drafted start in a sandbox.
"""

from remit.agent.models import Chat, ChatMessage, ChatView, Draft
from remit.agent.room import Chats
from remit.agent.workflow import OperatorAgent
from remit.policy.cedar import CHAT

__all__ = ["CHAT", "Chat", "ChatMessage", "ChatView", "Chats", "Draft", "OperatorAgent"]
