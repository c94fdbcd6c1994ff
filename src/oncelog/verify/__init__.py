"""`oncelog verify`: check a broker's exactly-once promises from a recorded history."""
