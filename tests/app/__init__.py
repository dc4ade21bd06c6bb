"""Tests of the application on top of the stages: the CLI, inspect, the build and the server, the layout, the golden data."""
