"""The fault suite (issue 43): the surroundings fail under the real agent's processes."""
