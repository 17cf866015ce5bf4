"""Generated from proto/hookd/v1/hookd.proto by generate.py; do not edit."""
