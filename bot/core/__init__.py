"""The chat-neutral core: requests, approvals, execution, policy, store; no Slack code."""
