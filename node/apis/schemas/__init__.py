"""Message schemas, in kafka.protocol's JSON form, of the few APIs kafka-python does not carry.

kafka.protocol builds its codecs from these as from its own (`load_json=` names this package).
"""
