"""Text environments and task generators (substrate for methods; imports only ``core``)."""
