//! Local guests: initramfs builder, kernel lookup, QEMU runner, serial-console reports.
