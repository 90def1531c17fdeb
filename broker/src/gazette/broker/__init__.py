"""Gazette brokers: journals served, replicated and persisted.

Placeholder until the broker issues land; see ``gazette.broker.protocol``.
"""
