// HardwareProfile and ClusterSpec (to be filled by the `ptdp plan` work).
#pragma once
