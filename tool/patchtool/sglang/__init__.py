"""What only this SGLang fork knows: its launch lines and the deployments that hold them, and
where a launch runs against a registry entry's scope. The generic layers never import this
package (``tests/test_layers.py``); the command line does."""
