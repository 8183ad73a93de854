pytest_plugins = ["tests.pg"]
