"""Tests of the application on top of the stages: the CLI, inspect, the build, the server, the layout,
the golden data."""
