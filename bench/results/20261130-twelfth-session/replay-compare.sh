#!/bin/bash
# cmp3.sh A.out B.out (rep3 raw: case min pages runs displaced)
join <(sort $1) <(sort $2) | sort -V | awk '{printf "%-12s MIN %8d  %8d %7d %7d | %8d %7d %7d  pages %+6.1f%% runs %+6.1f%% displ %+6.1f%%\n",$1,$2,$3,$4,$5,$7,$8,$9,100*($7/$3-1),100*($8/$4-1),100*($9/($5+1)-1)}'
