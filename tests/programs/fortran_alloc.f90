! gfortran ALLOCATE under `farmem run`: a 256 MiB array, filled and summed,
! checked against the same sum kept in an integer.
program fortran_alloc
  implicit none
  integer(kind=8), parameter :: n = 32_8 * 1024_8 * 1024_8
  real(kind=8), allocatable :: a(:)
  integer(kind=8) :: i, expect
  real(kind=8) :: s
  allocate(a(n))
  expect = 0
  do i = 1, n
    a(i) = real(mod(i, 1000_8), kind=8)
    expect = expect + mod(i, 1000_8)
  end do
  s = 0.0d0
  do i = 1, n
    s = s + a(i)
  end do
  deallocate(a)
  if (s == real(expect, kind=8)) then
    print '(a)', 'fortran allocate ok'
  else
    print '(a,f25.1)', 'fortran allocate FAILED ', s
    stop 1
  end if
end program
