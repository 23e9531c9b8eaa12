//! libvirt domain XML for guest interfaces, and the QEMU command line for local guests
