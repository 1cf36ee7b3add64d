//! Playbooks: an ordered list of typed steps plus a rollout strategy.
