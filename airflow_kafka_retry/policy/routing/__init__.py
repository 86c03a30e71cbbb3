"""Where a record goes: the destination resolver, a share group's redelivery."""
